from fleet.cli import main
from fleet.method.exit_status import exit_with

exit_with(main())
