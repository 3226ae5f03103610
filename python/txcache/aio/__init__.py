"""txcache for ``asyncio``: an async client of the cache nodes and the agent
(:mod:`txcache.aio._resp`, :mod:`txcache.aio._nodes`, :mod:`txcache.aio._agent`)."""
