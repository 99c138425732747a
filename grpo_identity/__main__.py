"""``python -m grpo_identity``: the command line (:mod:`grpo_identity.app.cli`)."""

import sys

from grpo_identity.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
