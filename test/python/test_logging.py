"""llmc's own messages reach Python's logging: the package installs a C API
log callback (llmc_set_log_callback) when it loads libllmc.so, so what the
library reports without failing (a session that turned CUDA graphs off, the
warnings and remarks of a compile that succeeded) goes to
logging.getLogger("llmc") at the matching level instead of stderr."""
import logging

from conftest import capi_or_skip

GRADS = """func.func @grads(%q: tensor<1x8x4x24xbf16>, %k: tensor<1x8x2x24xbf16>, %lse: tensor<1x4x8xf32>) -> tensor<1x8x4x24xbf16> {
  %g:3 = llm.attention_backward %q, %k, %k, %q, %q, %lse {causal} : tensor<1x8x4x24xbf16>, tensor<1x8x2x24xbf16>, tensor<1x8x2x24xbf16>, tensor<1x8x4x24xbf16>, tensor<1x8x4x24xbf16>, tensor<1x4x8xf32>
  return %g#0 : tensor<1x8x4x24xbf16>
}
"""


def test_compile_remarks_go_to_the_llmc_logger(caplog, capfd):
    capi = capi_or_skip()
    with caplog.at_level(logging.INFO, logger="llmc"):
        capi.Compiler({"arch": "sm_90a"}).compile(GRADS)
    records = [r for r in caplog.records if r.name == "llmc"]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    rec = records[0]
    assert rec.levelno == logging.INFO
    assert "remark: decomposed with the attention scores materialized" in rec.getMessage()
    assert "[1, 4, 8, 8]" in rec.getMessage()
    assert "materialized" not in capfd.readouterr().err  # not on stderr too


def test_a_handler_that_compiles_again_does_not_deadlock():
    """A logging handler may call llmc (here: compile again, which logs a
    remark of its own): the nested message is delivered and both compiles
    return (the sink lock is re-entrant; the compiler's lock is not held
    while logging)."""
    capi = capi_or_skip()
    seen = []

    class Recompile(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
            if len(seen) == 1:
                capi.Compiler({"arch": "sm_90a"}).compile(GRADS)

    log = logging.getLogger("llmc")
    handler = Recompile(level=logging.INFO)
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        capi.Compiler({"arch": "sm_90a"}).compile(GRADS)
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    assert len(seen) == 2 and all("materialized" in m for m in seen), seen
