"""What the process needs from its host, shared by every layer: numba imported with a writable cache
(:mod:`.jit`), state files created private (:mod:`.private_files`), loopback checks
(:mod:`.loopback`), one SQLite write transaction (:mod:`.sqlite_tx`) and unbounded numbers in JSON
(:mod:`.json_numbers`)."""
