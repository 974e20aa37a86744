from theory.cli import main

raise SystemExit(main())
