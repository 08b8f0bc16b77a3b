/* tests/fuzz/fuzz_hvdrun_options.c: hvdrun's command line (launcher/options.c
   hvdrun_parse_args, which never exits) and, when it parses, the launcher command built
   from it for OpenMPI and for MPICH (launcher/command.c hvdrun_build_command). Input:
   one argument per line (tests/fuzz/fuzz.h). --hostfile reads a file: inputs naming
   anything under /dev, /proc or /sys are skipped (a FIFO or a terminal would block). */
#include "tests/fuzz/fuzz.h"

#include "launcher/hvdrun.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (memmem(data, size, "dev", 3) || memmem(data, size, "proc", 4) ||
      memmem(data, size, "sys", 3))
    return 0;
  /* The launcher counts this machine's cores with hwloc. hwloc's PCI plugin (which
     hvdrun uses only to list GPUs for --check-build, not run here) leaks from inside
     libpciaccess and is unloaded before LeakSanitizer looks, so the leak cannot be
     suppressed by name: it is kept out instead. */
  static int once;
  if (!once++) setenv("HWLOC_COMPONENTS", "-pci", 0);
  fuzz_argv_t a;
  fuzz_argv_make(&a, "hvdrun", data, size);
  hvdrun_options_t o;
  char err[HVDRUN_ERR_LEN];
  if (hvdrun_parse_args(a.argc, a.argv, &o, err) == 0 && !o.help && !o.check_build) {
    static const hvdrun_mpi_t kinds[] = {HVDRUN_OPENMPI, HVDRUN_MPICH};
    for (int k = 0; k < 2; k++) {
      hvdrun_argv_t cmd = {0};
      if (hvdrun_build_command(&o, kinds[k], "/usr/bin/mpirun", &cmd, err) == 0) {
        for (int i = 0; i < cmd.n; i++) fuzz_touch(cmd.v[i], strlen(cmd.v[i]));
        if (cmd.v[cmd.n] != NULL) abort();
      }
      hvdrun_argv_free(&cmd);
    }
  }
  hvdrun_options_free(&o);
  fuzz_argv_free(&a);
  return 0;
}
