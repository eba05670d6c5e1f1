"""``python -m autosync_transfer.cli``: the command line (as the ``autosync-transfer`` script)."""

from autosync_transfer.cli import main

main()
