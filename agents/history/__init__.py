"""The node's history: the last hour in memory (ring.py: what a console's charts begin with)
over the SQLite file that keeps 90 days at falling resolution (db.py: its writes; reads.py:
its reads; rows.py: the format both share, pure)."""
