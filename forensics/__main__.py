from .lean import pyarrow_without_pandas

pyarrow_without_pandas()

from .cli import main  # noqa: E402

main()
