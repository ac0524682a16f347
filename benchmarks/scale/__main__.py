import sys

from benchmarks.scale.cli import main

sys.exit(main())
