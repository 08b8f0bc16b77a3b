/* util/flags.h: the command-line flags of the project's programs (train, the benches,
   hvdrun), parsed from one table per program so that every program takes the same
   syntax and words its mistakes the same way.

   Syntax: "--name value" and "--name=value"; '-' and '_' alike in names (--batch-size,
   --batch_size: tf_cnn_benchmarks and Horovod spell flags with '_', Keras-style scripts
   with '-'); booleans as --name, --name=true|false|1|0 or --no-name (a boolean never
   takes the next argument: "--quiet lenet" would be ambiguous); other spellings of a
   flag, such as nccl-tests' "-b" or mpirun's "-np", in its aliases (single-dash ones take
   their value from the next argument only, as getopt and mpirun do). Parsing stops at
   the first argument that is not a flag ("-" alone is one) or after "--": the program
   decides whether positional arguments are allowed.

   Library code: nothing is printed and nothing exits. util_flags_parse returns a status
   and one line in err; the program prints "PROGRAM: <err>" and exits. util_flags_usage
   writes the --help text, generated from the same table, where the program says. */
#ifndef UTIL_FLAGS_H
#define UTIL_FLAGS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
  UTIL_FLAG_BOOL,    /* int: 1 or 0                                                   */
  UTIL_FLAG_INT,     /* int                                                           */
  UTIL_FLAG_LONG,    /* long                                                          */
  UTIL_FLAG_U64,     /* uint64_t (no sign)                                            */
  UTIL_FLAG_FLOAT,   /* float (finite)                                                */
  UTIL_FLAG_DOUBLE,  /* double (finite)                                               */
  UTIL_FLAG_SIZE,    /* size_t bytes: "64", "1.5M"; K, M, G are powers of 1024        */
  UTIL_FLAG_STRING,  /* non-empty; dest_size 0: const char * into argv, else a copy
                        into char[dest_size]                                          */
  UTIL_FLAG_CHOICE,  /* as STRING, one of choices in any case; stores the table's
                        spelling (pointer: the choices' own string)                  */
  UTIL_FLAG_CUSTOM,  /* parse() reads nvalues arguments: what the table cannot say    */
} util_flag_type_t;

/* What util_flags_parse returns. */
enum { UTIL_FLAGS_ERROR = -1, UTIL_FLAGS_OK = 0, UTIL_FLAGS_HELP = 1 };

/* What a custom parse() returns besides UTIL_FLAGS_OK: BAD_VALUE with err holding what
   was expected ("expected VAR or VAR=value"), which the parser words like its own bad
   values; FAILED with err holding the whole message (a file that cannot be read). */
enum { UTIL_FLAG_BAD_VALUE = 1, UTIL_FLAG_FAILED = -1 };

typedef struct util_flag util_flag_t;
struct util_flag {
  const char *name;       /* after "--", the program's spelling: "batch-size"; NULL:
                             aliases only (mpirun's -x), or, without aliases either, a
                             heading in --help (help is its text)                    */
  util_flag_type_t type;
  void *dest;             /* what the value is written to (type above)               */
  const char *help;       /* one sentence; wrapped by util_flags_usage               */
  const char *def;        /* the default in --help; NULL: read from *dest (help is
                             generated before parsing, so dest holds the default;
                             booleans show it only when on); "": none                */
  const char *metavar;    /* the value in --help: NULL: N, X, SIZE, VALUE, a|b|c     */
  const char *aliases;    /* other spellings with their dashes, space-separated:
                             "-b" or "-np -n --np"                                   */
  size_t dest_size;       /* STRING, CHOICE: bytes of a char buffer dest; 0: pointer */
  const char *const *choices;   /* CHOICE: NULL-terminated                           */
  double min, max;        /* numbers, SIZE: the accepted range when min < max (max
                             may be INFINITY: "at least min"); else the type's range */
  /* CUSTOM: values[0..nvalues) (nvalues 0 means 1); err, errlen: see the enum above. */
  int (*parse)(const util_flag_t *flag, char **values, char *err, size_t errlen);
  int nvalues;
};

/* A program's flags and what its --help says around them. */
typedef struct {
  const char *prog;       /* "train": in every message and in "see train --help"     */
  const char *usage;      /* after "usage: ": "mpirun -np N train [flags]"           */
  const char *about;      /* text after the usage line (may hold newlines); NULL      */
  const util_flag_t *flags;
  size_t nflags;
  const char *footer;     /* text after the flag list; NULL                          */
  const char *unknown_hint;  /* appended to "unknown flag" messages; NULL            */
  int positionals;        /* 0: an argument that is not a flag is an error; 1: parsing
                             stops there (hvdrun: the program and its arguments)     */
} util_flags_spec_t;

#define UTIL_FLAGS_COUNT(table) (sizeof(table) / sizeof((table)[0]))

/* Parses argv[1..argc) against spec. Returns UTIL_FLAGS_OK with *first_positional the
   index of the first argument that is not a flag (argc when none; after "--", the one
   after it; with spec->positionals 0 such an argument is an error), UTIL_FLAGS_HELP at
   -h or --help, or UTIL_FLAGS_ERROR with one line in err
   naming the flag as the user spelled it, the value and what was expected, ending
   "; see PROG --help" (messages from a custom parse() that FAILED stand as written).
   Flags before the error have been written to their destinations. */
int util_flags_parse(const util_flags_spec_t *spec, int argc, char **argv,
                     int *first_positional, char *err, size_t errlen);

/* The --help text: usage line, about, one entry per flag (its spellings, value, help,
   default, choices) wrapped to 80 columns, -h/--help, the syntax line, footer. */
void util_flags_usage(const util_flags_spec_t *spec, FILE *f);

/* The index of value in the NULL-terminated choices, in any case; -1: none. */
int util_flags_choice(const char *const *choices, const char *value);

/* The flag of spec closest to the unknown spelling name (with its dashes), for "did you
   mean": its spelling with dashes, or NULL when nothing is close enough. */
const char *util_flags_suggest(const util_flags_spec_t *spec, const char *name, char *buf,
                               size_t len);

#endif /* UTIL_FLAGS_H */
