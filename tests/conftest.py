import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
os.environ.pop("TANDEM_LLM_URL", None)  # tests choose their own servers
