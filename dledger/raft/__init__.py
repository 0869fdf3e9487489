"""The deterministic, I/O-free Raft core: every decision takes `now_ms` and returns
messages or results; threads, sockets and files live in the shell around it."""
