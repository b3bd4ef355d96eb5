"""The failure kinds the simulated server can be told to inject (``--fail-kinds``): an HTTP
500, a 200 whose body is not JSON, or a connection closed without an answer. Its own module,
so that the command line (cli.py, argparse only) and the server (app.py, aiohttp) share it
without importing each other."""

FAIL_KINDS = ("500", "garbage", "disconnect")
