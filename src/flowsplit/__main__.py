import sys

from flowsplit.cli import main

if __name__ == "__main__":
    sys.exit(main())
