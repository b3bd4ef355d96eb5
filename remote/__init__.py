"""Reaching the nodes; never imports textual. From the top: client (FleetClient) and deploy;
transports (chooses one per node); ssh (with known_hosts, ssh_errors) and local; link
(AgentLink, NodeError and the other errors); fleet (the fleet file)."""
