import sys

from grpo_identity.app.cli import main

sys.exit(main())
