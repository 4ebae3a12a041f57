"""`python -m stoker._pack_parquet SRC.parquet... DST [options]`: what `stoker pack` runs for
Parquet input (stoker.sources.main). A module of its own, which `import stoker` does not
import: run as `python -m stoker.sources`, that module would be imported twice (once by the
package, once as __main__), and runpy warns so."""
import sys

from stoker.sources import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
