/* tests/test_util_flags.c: util/flags.c, the programs' flag parser. Both syntaxes, '-'
   and '_' alike, the boolean forms, aliases, where parsing stops, every error with its
   exact message, the "did you mean" guess (typo, swapped letters, a beginning; none for
   what is not close), ranges, and the --help text generated from the table. */
#include "tests/check.h"
#include "util/flags.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int epochs, quiet, verbose;
  long steps;
  uint64_t seed;
  float lr;
  double ratio;
  size_t min_bytes;
  const char *logdir;
  char model[8];
  const char *optimizer;
  char env[64];
} opts_t;

/* CUSTOM with two values: "--env KEY VALUE" becomes "KEY=VALUE". */
static int parse_env(const util_flag_t *flag, char **values, char *err, size_t errlen) {
  if (values[0][0] == '\0' || strchr(values[0], '=')) {
    snprintf(err, errlen, "a KEY without '='");
    return UTIL_FLAG_BAD_VALUE;
  }
  if (strcmp(values[0], "FAIL") == 0) {
    snprintf(err, errlen, "the whole message, as the program words it");
    return UTIL_FLAG_FAILED;
  }
  snprintf((char *)flag->dest, 64, "%s=%s", values[0], values[1]);
  return UTIL_FLAGS_OK;
}

static const char *const optimizers[] = {"sgd", "adam", NULL};

static opts_t o;
static const util_flag_t table[] = {
    {"epochs", UTIL_FLAG_INT, &o.epochs, .help = "epochs to train", .min = 1, .max = 100},
    {"quiet", UTIL_FLAG_BOOL, &o.quiet, .help = "print less"},
    {"verbose", UTIL_FLAG_BOOL, &o.verbose, .help = "print more"},
    {"steps", UTIL_FLAG_LONG, &o.steps, .help = "steps", .min = 0, .max = INFINITY},
    {"seed", UTIL_FLAG_U64, &o.seed, .help = "seed"},
    {"lr", UTIL_FLAG_FLOAT, &o.lr, .help = "learning rate", .min = 0, .max = 10},
    {"ratio", UTIL_FLAG_DOUBLE, &o.ratio, .help = "a ratio"},
    {NULL, .help = "Sizes:"},
    {"min_bytes", UTIL_FLAG_SIZE, &o.min_bytes, .help = "smallest message", .aliases = "-b --minbytes",
     .min = 1, .max = INFINITY},
    {"logdir", UTIL_FLAG_STRING, &o.logdir, .help = "write logs here", .metavar = "DIR"},
    {"model", UTIL_FLAG_STRING, o.model, .help = "model name", .dest_size = sizeof o.model},
    {"optimizer", UTIL_FLAG_CHOICE, &o.optimizer, .help = "optimizer", .choices = optimizers},
    {"env", UTIL_FLAG_CUSTOM, o.env, .help = "set KEY to VALUE", .def = "", .metavar = "KEY VALUE",
     .parse = parse_env, .nvalues = 2},
};
static const util_flags_spec_t spec = {
    .prog = "prog", .usage = "prog [flags] FILE...", .about = "Does things.\n",
    .flags = table, .nflags = UTIL_FLAGS_COUNT(table), .footer = "The end.\n",
    .positionals = 1};
static const util_flags_spec_t flags_only = {
    .prog = "prog", .usage = "prog [flags]", .flags = table, .nflags = UTIL_FLAGS_COUNT(table)};
static const util_flags_spec_t hinted = {
    .prog = "launch", .usage = "launch", .flags = table, .nflags = UTIL_FLAGS_COUNT(table),
    .unknown_hint = "flags of the program go after its name"};

static void reset(void) {
  memset(&o, 0, sizeof o);
  o.epochs = 3;
  o.lr = 0.5f;
  o.min_bytes = 8;
  o.optimizer = "sgd";
  strcpy(o.model, "lenet");
}

static char err[512];
static int first;

/* Parses the arguments (a NULL-terminated list after the program name). */
#define PARSE_WITH(sp, ...)                                                     \
  ({                                                                            \
    char *argv_[] = {"prog", __VA_ARGS__, NULL};                                \
    err[0] = '\0';                                                              \
    first = -1;                                                                 \
    util_flags_parse(&(sp), (int)(sizeof argv_ / sizeof *argv_) - 1, argv_, &first, err, \
                     sizeof err);                                               \
  })
#define PARSE(...) PARSE_WITH(spec, __VA_ARGS__)

/* The arguments fail with exactly this message. */
#define EXPECT_ERROR(msg, ...)                                                            \
  do {                                                                                    \
    reset();                                                                              \
    int rc_ = PARSE(__VA_ARGS__);                                                         \
    CHECK(rc_ == UTIL_FLAGS_ERROR, "%s: rc %d, expected an error", #__VA_ARGS__, rc_);    \
    CHECK(strcmp(err, msg) == 0, "%s: message\n  '%s', expected\n  '%s'", #__VA_ARGS__, err, msg); \
  } while (0)

static void test_syntaxes(void) {
  reset();
  CHECK(PARSE("--epochs", "7") == UTIL_FLAGS_OK && o.epochs == 7, "--epochs 7: %d (%s)", o.epochs, err);
  CHECK(PARSE("--epochs=8") == UTIL_FLAGS_OK && o.epochs == 8, "--epochs=8: %d (%s)", o.epochs, err);
  /* '-' and '_' alike, both ways, in either syntax. */
  CHECK(PARSE("--min-bytes", "16") == UTIL_FLAGS_OK && o.min_bytes == 16, "--min-bytes: %zu", o.min_bytes);
  CHECK(PARSE("--min_bytes=32") == UTIL_FLAGS_OK && o.min_bytes == 32, "--min_bytes=: %zu", o.min_bytes);
  /* Aliases: a single-dash one takes the next argument; a long one behaves as the name. */
  CHECK(PARSE("-b", "4K") == UTIL_FLAGS_OK && o.min_bytes == 4096, "-b 4K: %zu (%s)", o.min_bytes, err);
  CHECK(PARSE("--minbytes=1.5M") == UTIL_FLAGS_OK && o.min_bytes == 1572864, "--minbytes=1.5M: %zu", o.min_bytes);
  CHECK(PARSE("-b", "2g") == UTIL_FLAGS_OK && o.min_bytes == ((size_t)2 << 30), "-b 2g: %zu", o.min_bytes);
  /* The value may itself start with '-' or hold '='. */
  CHECK(PARSE("--steps", "5", "--logdir", "-odd=name") == UTIL_FLAGS_OK &&
        strcmp(o.logdir, "-odd=name") == 0 && o.steps == 5, "--logdir -odd=name: %s", o.logdir);
  CHECK(PARSE("--logdir=a=b") == UTIL_FLAGS_OK && strcmp(o.logdir, "a=b") == 0,
        "--logdir=a=b: %s", o.logdir);
  /* Copies into a buffer; pointers point into argv. */
  CHECK(PARSE("--model", "mlp") == UTIL_FLAGS_OK && strcmp(o.model, "mlp") == 0, "--model: %s", o.model);
  CHECK(PARSE("--seed", "18446744073709551615") == UTIL_FLAGS_OK && o.seed == UINT64_MAX,
        "--seed max: %llu", (unsigned long long)o.seed);
  CHECK(PARSE("--ratio", "-2.5e-3") == UTIL_FLAGS_OK && o.ratio == -2.5e-3, "--ratio: %g", o.ratio);
  CHECK(PARSE("--lr", "0.25") == UTIL_FLAGS_OK && o.lr == 0.25f, "--lr: %g", (double)o.lr);
  /* A choice in any case is stored as the table spells it. */
  CHECK(PARSE("--optimizer", "ADAM") == UTIL_FLAGS_OK && o.optimizer == optimizers[1],
        "--optimizer ADAM: %s", o.optimizer);
  CHECK(PARSE("--env", "K", "v w") == UTIL_FLAGS_OK && strcmp(o.env, "K=v w") == 0, "--env: %s", o.env);
}

static void test_bools(void) {
  reset();
  CHECK(PARSE("--quiet") == UTIL_FLAGS_OK && o.quiet == 1, "--quiet");
  CHECK(PARSE("--quiet=false") == UTIL_FLAGS_OK && o.quiet == 0, "--quiet=false");
  CHECK(PARSE("--quiet=TRUE") == UTIL_FLAGS_OK && o.quiet == 1, "--quiet=TRUE");
  CHECK(PARSE("--quiet=0") == UTIL_FLAGS_OK && o.quiet == 0, "--quiet=0");
  CHECK(PARSE("--quiet=1", "--no-quiet") == UTIL_FLAGS_OK && o.quiet == 0, "--no-quiet");
  CHECK(PARSE("--verbose", "--no_verbose", "--verbose") == UTIL_FLAGS_OK && o.verbose == 1,
        "the last of --verbose --no_verbose --verbose wins");
  /* A boolean never takes the next argument: it is the first positional. */
  CHECK(PARSE("--quiet", "true") == UTIL_FLAGS_OK && first == 2, "--quiet true: first %d", first);
  EXPECT_ERROR("bad value 'yes' for --quiet: expected true or false (or 1, 0); see prog --help",
               "--quiet=yes");
  CHECK(PARSE("--no-quiet=1") == UTIL_FLAGS_OK && o.quiet == 0, "--no-quiet=1");
  CHECK(PARSE("--no-quiet=false") == UTIL_FLAGS_OK && o.quiet == 1, "--no-quiet=false");
  EXPECT_ERROR("bad value 'maybe' for --no-quiet: expected true or false (or 1, 0); "
               "see prog --help", "--no-quiet=maybe");
  /* --no- only turns off booleans. */
  EXPECT_ERROR("unknown flag --no-epochs; see prog --help", "--no-epochs");
}

static void test_positionals(void) {
  reset();
  CHECK(PARSE("--epochs", "2") == UTIL_FLAGS_OK && first == 3, "no positional: first %d, want 3", first);
  CHECK(PARSE("--epochs", "2", "file", "--quiet") == UTIL_FLAGS_OK && first == 3 && o.quiet == 0,
        "stops at 'file': first %d, quiet %d", first, o.quiet);
  CHECK(PARSE("--", "--quiet") == UTIL_FLAGS_OK && first == 2 && o.quiet == 0, "--: first %d", first);
  CHECK(PARSE("-", "x") == UTIL_FLAGS_OK && first == 1, "'-' is a positional: first %d", first);
  /* A program that takes only flags refuses the rest; "--" alone is no argument. */
  CHECK(PARSE_WITH(flags_only, "--quiet", "lenet") == UTIL_FLAGS_ERROR &&
        strcmp(err, "unexpected argument 'lenet' (prog takes only flags); see prog --help") == 0,
        "flags only: %s", err);
  CHECK(PARSE_WITH(flags_only, "--quiet", "--") == UTIL_FLAGS_OK, "flags only, '--': %s", err);
  CHECK(PARSE("--quiet", "--help") == UTIL_FLAGS_HELP, "--help");
  CHECK(PARSE("-h") == UTIL_FLAGS_HELP, "-h");
  EXPECT_ERROR("--help takes no value; see prog --help", "--help=1");
}

static void test_errors(void) {
  EXPECT_ERROR("unknown flag --epoch (did you mean --epochs?); see prog --help", "--epoch", "3");
  EXPECT_ERROR("unknown flag --epcohs (did you mean --epochs?); see prog --help", "--epcohs=3");
  EXPECT_ERROR("unknown flag --optimiser (did you mean --optimizer?); see prog --help", "--optimiser");
  EXPECT_ERROR("unknown flag --min-byte (did you mean --min_bytes?); see prog --help", "--min-byte");
  EXPECT_ERROR("unknown flag --minbyte (did you mean --minbytes?); see prog --help", "--minbyte");
  EXPECT_ERROR("unknown flag --verb (did you mean --verbose?); see prog --help", "--verb");
  /* Nothing close: no guess; nor for one or two letters (every short flag is close). */
  EXPECT_ERROR("unknown flag -c; see prog --help", "-c");
  EXPECT_ERROR("unknown flag --bogus; see prog --help", "--bogus");
  EXPECT_ERROR("unknown flag --xy; see prog --help", "--xy");
  EXPECT_ERROR("unknown flag --frobnicate; see prog --help", "--frobnicate");
  /* Single-dash flags take no "=value" (as getopt and mpirun). */
  EXPECT_ERROR("unknown flag -b=4; see prog --help", "-b=4");
  EXPECT_ERROR("--epochs needs a value; see prog --help", "--quiet", "--epochs");
  EXPECT_ERROR("--env needs 2 values (--env KEY VALUE); see prog --help", "--env", "K");
  EXPECT_ERROR("--env takes 2 values as separate arguments (--env KEY VALUE); see prog --help",
               "--env=K");
  EXPECT_ERROR("bad value 'X=1' for --env: expected a KEY without '='; see prog --help",
               "--env", "X=1", "v");
  EXPECT_ERROR("the whole message, as the program words it", "--env", "FAIL", "v");
  EXPECT_ERROR("bad value 'three' for --epochs: expected an integer in [1, 100]; see prog --help",
               "--epochs", "three");
  EXPECT_ERROR("bad value '3x' for --epochs: expected an integer in [1, 100]; see prog --help",
               "--epochs=3x");
  EXPECT_ERROR("bad value ' 3' for --epochs: expected an integer in [1, 100]; see prog --help",
               "--epochs", " 3");
  EXPECT_ERROR("bad value '' for --epochs: expected an integer in [1, 100]; see prog --help",
               "--epochs=");
  EXPECT_ERROR("bad value '0' for --epochs: expected an integer in [1, 100]; see prog --help",
               "--epochs", "0");
  EXPECT_ERROR("bad value '101' for --epochs: expected an integer in [1, 100]; see prog --help",
               "--epochs", "101");
  EXPECT_ERROR("bad value '-1' for --steps: expected an integer >= 0; see prog --help",
               "--steps", "-1");
  EXPECT_ERROR("bad value '-1' for --seed: expected a non-negative integer; see prog --help",
               "--seed", "-1");
  EXPECT_ERROR("bad value '18446744073709551616' for --seed: expected a non-negative integer; "
               "see prog --help", "--seed", "18446744073709551616");
  EXPECT_ERROR("bad value '0.1x' for --lr: expected a number in [0, 10]; see prog --help",
               "--lr", "0.1x");
  EXPECT_ERROR("bad value '11' for --lr: expected a number in [0, 10]; see prog --help",
               "--lr", "11");
  EXPECT_ERROR("bad value 'nan' for --lr: expected a number in [0, 10]; see prog --help",
               "--lr", "nan");
  EXPECT_ERROR("bad value 'inf' for --ratio: expected a number; see prog --help", "--ratio", "inf");
  EXPECT_ERROR("bad value '1e999' for --ratio: expected a number; see prog --help", "--ratio", "1e999");
  EXPECT_ERROR("bad value '0' for -b: expected a size in bytes such as 64, 4K, 1.5M or 2G >= 1; "
               "see prog --help", "-b", "0");
  EXPECT_ERROR("bad value '4KB' for --min_bytes: expected a size in bytes such as 64, 4K, 1.5M "
               "or 2G >= 1; see prog --help", "--min_bytes", "4KB");
  EXPECT_ERROR("bad value 'lamb' for --optimizer: expected one of sgd, adam; see prog --help",
               "--optimizer", "lamb");
  EXPECT_ERROR("bad value '' for --logdir: expected a non-empty value; see prog --help", "--logdir=");
  EXPECT_ERROR("bad value 'resnet101' for --model: expected at most 7 characters; see prog --help",
               "--model", "resnet101");
  /* The values of the flags before the error are set; the rest keep their defaults. */
  reset();
  PARSE("--epochs", "9", "--bogus", "--steps", "4");
  CHECK(o.epochs == 9 && o.steps == 0, "before the error: epochs %d, steps %ld", o.epochs, o.steps);
  /* The hint for unknown flags. */
  reset();
  PARSE_WITH(hinted, "--bogus");
  CHECK(strcmp(err, "unknown flag --bogus; see launch --help; flags of the program go after "
                    "its name") == 0, "hint: %s", err);
}

/* A 5000-character flag or value keeps the message one readable line. */
static void test_long_values(void) {
  char *big = malloc(5004);
  memset(big, 'd', 5003);
  memcpy(big, "--", 2);
  big[5003] = '\0';
  reset();
  char *argv1[] = {"prog", big, NULL};
  int rc = util_flags_parse(&spec, 2, argv1, &first, err, sizeof err);
  CHECK(rc == UTIL_FLAGS_ERROR && strncmp(err, "unknown flag --ddd", 18) == 0 &&
        strstr(err, "bytes left out") && strstr(err, "; see prog --help") && strlen(err) < 200,
        "long flag: %s", err);
  char *argv2[] = {"prog", "--epochs", big + 2, NULL};
  rc = util_flags_parse(&spec, 3, argv2, &first, err, sizeof err);
  CHECK(rc == UTIL_FLAGS_ERROR && strncmp(err, "bad value 'ddd", 14) == 0 &&
        strstr(err, "bytes left out") && strstr(err, "for --epochs: expected an integer") &&
        strlen(err) < 250, "long value: %s", err);
  /* A small err buffer is cut, never overrun. */
  char small[16];
  rc = util_flags_parse(&spec, 2, argv1, &first, small, sizeof small);
  CHECK(rc == UTIL_FLAGS_ERROR && strlen(small) == 15, "small buffer: '%s'", small);
  free(big);
}

static void test_suggest(void) {
  char buf[64];
  const char *s = util_flags_suggest(&spec, "--lr-rate", buf, sizeof buf);
  CHECK(s == NULL, "--lr-rate: suggested %s", s ? s : "(none)");
  s = util_flags_suggest(&spec, "--seeds", buf, sizeof buf);
  CHECK(s && strcmp(s, "--seed") == 0, "--seeds: %s", s ? s : "(none)");
  /* A beginning shared by two flags is no guess. */
  s = util_flags_suggest(&spec, "--min", buf, sizeof buf);
  CHECK(s && strcmp(s, "--min_bytes") == 0, "--min: %s", s ? s : "(none)");
  s = util_flags_suggest(&spec, "--ste", buf, sizeof buf);
  CHECK(s && strcmp(s, "--steps") == 0, "--ste: %s", s ? s : "(none)");
}

static void test_help(void) {
  reset();
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  util_flags_usage(&spec, f);
  fclose(f);
  static const char *const want[] = {
      "usage: prog [flags] FILE...\nDoes things.\n\nflags:\n",
      "\n  --epochs N                  epochs to train (default 3)\n",
      "\n  --quiet                     print less\n",     /* off: no default shown */
      "\n  --lr X                      learning rate (default 0.5)\n",
      "\nSizes:\n  -b, --minbytes, --min_bytes SIZE\n"
      "                              smallest message (default 8)\n",
      "\n  --logdir DIR                write logs here\n",   /* NULL: no default */
      "\n  --model VALUE               model name (default lenet)\n",
      "\n  --optimizer sgd|adam        optimizer (default sgd)\n",
      "\n  --env KEY VALUE             set KEY to VALUE\n",
      "\n  -h, --help                  this text\n",
      "--no-name.\nThe end.\n",
  };
  for (size_t k = 0; k < sizeof want / sizeof *want; k++)
    CHECK(text && strstr(text, want[k]), "--help lacks '%s':\n%s", want[k], text);
  free(text);
}

int main(void) {
  test_syntaxes();
  test_bools();
  test_positionals();
  test_errors();
  test_long_values();
  test_suggest();
  test_help();
  if (failures) fprintf(stderr, "%d failures\n", failures);
  else printf("test_util_flags: all passed\n");
  return failures ? 1 : 0;
}
