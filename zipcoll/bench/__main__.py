import sys

from zipcoll.bench import main

sys.exit(main())
