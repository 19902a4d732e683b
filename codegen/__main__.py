import sys

from tinsmith.cli import main

sys.exit(main())
