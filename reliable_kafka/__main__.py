"""``python -m reliable_kafka``: the same as the ``reliable-kafka`` command."""

import sys

from reliable_kafka.cli import main

sys.exit(main())
