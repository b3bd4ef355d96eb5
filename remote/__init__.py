"""SSH transport: fleet file, connections, agent deployment, request/reply client. Never imports textual."""
