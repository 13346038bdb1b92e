/* A C program built against the installed llmc through pkg-config
 * (test/package/check-package.sh): prints the library's version. */
#include <llmc/llmc_c.h>
#include <stdio.h>

int main(void) {
  printf("%s\n", llmc_version());
  return 0;
}
