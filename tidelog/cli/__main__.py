"""``python -m tidelog.cli``: how a local cluster starts its brokers, and how tests run the
command without the console script."""

import sys

from tidelog.cli import main

sys.exit(main())
