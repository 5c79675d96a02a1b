"""python -m benchmarks.gpu_check [--dry-run]"""

from benchmarks.gpu_check.runner import main

raise SystemExit(main())
