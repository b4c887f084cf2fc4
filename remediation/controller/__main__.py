"""``python -m remediation.controller controller|watchdog --url URL --token-file FILE``."""

import sys

from .cli import main

sys.exit(main())
