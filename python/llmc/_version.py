"""llmc's version: the same string as `project(llmc VERSION ...)` in the
top-level CMakeLists.txt and the C API's llmc_version() (a test keeps them
equal; the library is refused at load time when they differ)."""

__version__ = "0.1.0"
