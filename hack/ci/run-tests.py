"""`make test`'s runner: the test tiers in two lanes side by side, then one table of every tier.
The runner lives in the test kit (mwms_kit.runner), where its own tests import it."""

import sys

from mwms_kit.runner import main

if __name__ == "__main__":
    sys.exit(main())
