"""Turns gRPC's fork handlers off for this process: imported first by `dledger`.

GRPC_ENABLE_FORK_SUPPORT is set to false unless the environment sets it. With the
handlers on, a child forked to run a program (a `subprocess.Popen` with `preexec_fn`, as
PySpark starts its JVM) crashed with SIGABRT or SIGSEGV before its exec in 5-6 % of
forks once gRPC had been used (grpcio 1.85; tests/unit/test_fork_safety.py), and
dledger starts Spark, members and tools that way. No child of dledger uses gRPC
inherited from its parent, which is all that fork support is for. gRPC reads the
setting when it is imported, so this must come before any `import grpc`.
"""

import os
import sys

GRPC_FORK_HANDLERS_ON = "grpc" in sys.modules and "GRPC_ENABLE_FORK_SUPPORT" not in os.environ
"""True when gRPC was imported before dledger with its fork handlers on (too late to
turn them off here); `dledger.spark.local_session` warns then."""

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
