"""`python -m stoker._pack_migrate SRC_DIR DST [options]`: what `stoker pack` runs for a
directory holding an MDS or LitData index.json (stoker.migrate.main). A module of its own, which
`import stoker` does not import, for the reason python/stoker/_pack_parquet.py gives."""
import sys

from stoker.migrate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
