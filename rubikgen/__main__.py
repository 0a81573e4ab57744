from rubikgen.cli import main

raise SystemExit(main())
