"""`python -m kvx_tools.convert MODEL.onnx -o MODEL_DIR ...`: the converter's command line (pipeline.py),
the one `kvx convert` runs."""
import sys

from .pipeline import main

if __name__ == "__main__":
    # Named here: argparse would call the program "__main__.py", the file's name.
    sys.exit(main(prog="python -m kvx_tools.convert"))
