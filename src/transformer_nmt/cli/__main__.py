"""`python -m transformer_nmt.cli`, which torchrun needs to start `nmt train` processes."""

import sys

from transformer_nmt.cli import main

sys.exit(main())
