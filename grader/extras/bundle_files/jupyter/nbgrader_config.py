# Read by nbgrader's Validate button (jupyter/ is on JUPYTER_CONFIG_PATH): each failing cell in one line, as
from utils.validate import short_failure  # `./pack.sh validate` prints it (utils/validate.py short_failure)
get_config().Execute.on_cell_error = short_failure  # noqa: F821  (traitlets provides get_config)
