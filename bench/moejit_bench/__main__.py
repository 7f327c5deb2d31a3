import sys

from .layer import main

sys.exit(main())
