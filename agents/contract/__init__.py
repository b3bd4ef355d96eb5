"""Everything that crosses a process boundary, and nothing else: the wire between console and
agent (wire, plain), the ops a console asks for (ops), the job vocabulary and units (vocab,
units), what a job is and the options of each kind (jobs, kinds), the documents one process
writes and another reads (documents), and the errors an operator reads (errors).

The console (console/) and the SSH side (remote/) import nothing else of agents/."""

VERSION = "0.2.0"  # gpudeck's version: the agent and the console check each other's (wire.Hello)
