"""``python -m autosync_transfer ...`` (and ``torchrun ... -m autosync_transfer worker ...``):
the command line."""

from __future__ import annotations

from autosync_transfer.cli import main

if __name__ == "__main__":
    main()
