"""``flower-supernode`` that exits when its connection to the SuperLink has ended.

Why: Flower's SuperNode (1.42) ends its connection on a SuperLink error it does not retry (an
HTTP 500 on ``pull-messages``, which a SuperLink under load answers when its SQLite state is
locked), logs one line, deactivates its node and returns from its main loop; but its Runtime
API server thread keeps the process alive. The node is then offline for good while its process
looks healthy, so neither ``powerfleet device`` nor systemd would start it again, and its device
stays ``lost`` (seen at 40 SuperNodes on one machine, docs/deploy-load.md). Run through this
module, a SuperNode whose main loop returns exits with ``CONNECTION_ENDED``, which its
supervisor takes as "start it again" (``deployment/cli.py``; ``benchmarks/deploy_load.py``);
the coordinator then identifies the new node and the device resumes from its checkpoint.

A stop asked for (SIGINT/SIGTERM) still leaves through Flower's own exit path: its handlers
end the process with ``SystemExit``, which is not caught here.
"""

from __future__ import annotations

import os
import sys

CONNECTION_ENDED = 75  # EX_TEMPFAIL: a temporary failure, worth trying again


def main(argv: list[str] | None = None) -> None:
    from flwr.supernode.cli import flower_supernode

    sys.argv = ["flower-supernode", *(sys.argv[1:] if argv is None else argv)]
    flower_supernode()
    sys.stdout.flush()
    sys.stderr.write(
        "powerfleet: the SuperNode's connection to the SuperLink ended (see the error above); "
        f"exiting with code {CONNECTION_ENDED} to be started again\n"
    )
    sys.stderr.flush()
    # os._exit, not sys.exit: the Runtime API's server thread would keep a normal exit waiting
    os._exit(CONNECTION_ENDED)


if __name__ == "__main__":
    main()
