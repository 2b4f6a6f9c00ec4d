"""``python -m torch_mars``: the ``torch-mars`` command."""

import sys

from torch_mars.cli import main

sys.exit(main())
