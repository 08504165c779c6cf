import sys

from segfactory.cli import main

sys.exit(main())
