# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "LLMC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.llmc_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit", "python"]
config.substitutions.append(("%llmc_src_root", config.llmc_src_root))
# Tools built with -DLLMC_SANITIZE=address (build-asan): ASan reserves its
# shadow memory at start-up, so a run under `ulimit -v` cannot start there.
if "address" in getattr(config, "llmc_sanitize", ""):
    config.available_features.add("asan")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
tool_dirs = [config.llmc_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["llmc-opt", "llmc-compile", "llmc-run", "llmc-serve"], tool_dirs)
