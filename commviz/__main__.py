import sys

from commviz.cli import main

sys.exit(main())
