"""A small shop on FastAPI, SQLAlchemy's AsyncSession and txcache: a catalogue and orders,
its pages cached at a pinned snapshot, read-your-writes across requests through a token.
How to run it: README.md beside this file."""
