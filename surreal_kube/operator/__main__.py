"""`python -m surreal_kube.operator` (see main.py)."""

import sys

from surreal_kube.operator.main import main

sys.exit(main())
