"""``python -m pytimely``: the pytimely command line."""

import sys

from pytimely.cli import main

sys.exit(main())
