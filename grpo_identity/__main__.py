import sys

from grpo_identity.cli import main

sys.exit(main())
