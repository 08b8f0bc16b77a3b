/* launcher/words.c: --mpi-args "..." split into the words a POSIX shell would make of
   it, so that horovodrun's --mpi-args "--mca btl ^openib -x 'A=b c'" means the same
   here. Only quoting and blanks are a shell's that hvdrun does; what a shell would
   expand or treat as an operator is refused with a message, never passed on as it
   stands (the launcher would get a word the user never meant). */
#include "launcher/hvdrun.h"

#include <stdlib.h>
#include <string.h>

/* Why c, unquoted, means more to a shell than itself (NULL: it does not). */
static const char *shell_meaning(char c, int word_start)
{
  switch (c) {
  case '$': return "expands a variable or a command";
  case '`': return "substitutes a command";
  case ';': case '&': case '|': return "ends a command";
  case '<': case '>': return "redirects";
  case '(': case ')': return "opens or closes a subshell";
  case '*': case '?': case '[': return "expands file names";
  case '#': return word_start ? "starts a comment" : NULL;
  case '~': return word_start ? "expands to a home directory" : NULL;
  default: return NULL;
  }
}

static int refuse(char *err, const char *what, const char *s, size_t at, const char *why)
{
  return hvdrun_errf(err, "%s: '%c' (character %zu) %s in a shell, which hvdrun does not "
                     "do: quote it ('%c') or expand it before hvdrun; in: %s", what, s[at],
                     at + 1, why, s[at], s);
}

int hvdrun_split_words(const char *s, const char *what, hvdrun_argv_t *out, char *err)
{
  const size_t n = strlen(s);
  char *word = hvdrun_xmalloc(n + 1);   /* no word is longer than s */
  size_t len = 0;
  int in_word = 0, rc = 0;
  hvdrun_argv_t words = {0};            /* handed to out only when all of s is good */
  for (size_t i = 0; i < n && rc == 0; i++) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) {
        word[len] = '\0';
        hvdrun_argv_push(&words, word);
        len = 0;
        in_word = 0;
      }
      continue;
    }
    const int word_start = !in_word;
    in_word = 1;   /* even '' is a word: an empty one */
    if (c == '\'') {   /* everything up to the next ' as it is */
      const char *end = strchr(s + i + 1, '\'');
      if (end == NULL) {
        rc = hvdrun_errf(err, "%s: the ' at character %zu is never closed (a ' inside "
                         "words goes between \"...\" or after a backslash); in: %s", what,
                         i + 1, s);
        break;
      }
      size_t k = (size_t)(end - (s + i + 1));
      memcpy(word + len, s + i + 1, k);
      len += k;
      i = (size_t)(end - s);
    } else if (c == '"') {   /* a backslash escapes $ ` " \ and a newline only */
      size_t j = i + 1;
      for (; j < n && s[j] != '"'; j++) {
        if (s[j] == '\\' && j + 1 < n && strchr("$`\"\\\n", s[j + 1])) {
          if (s[j + 1] != '\n') word[len++] = s[j + 1];
          j++;
        } else if (s[j] == '$' || s[j] == '`') {
          rc = refuse(err, what, s, j, s[j] == '$' ? "expands a variable or a command"
                                                   : "substitutes a command");
          break;
        } else {
          word[len++] = s[j];
        }
      }
      if (rc == 0 && j >= n)
        rc = hvdrun_errf(err, "%s: the \" at character %zu is never closed (a \" inside "
                         "words goes between '...' or after a backslash); in: %s", what,
                         i + 1, s);
      i = j;
    } else if (c == '\\') {
      if (i + 1 >= n) {
        rc = hvdrun_errf(err, "%s: it ends in a backslash, which escapes nothing; in: %s",
                         what, s);
        break;
      }
      i++;
      if (s[i] == '\n') in_word = !word_start;   /* a line continuation: no character */
      else word[len++] = s[i];
    } else {
      const char *why = shell_meaning(c, word_start);
      if (why != NULL) rc = refuse(err, what, s, i, why);
      else word[len++] = c;
    }
  }
  if (rc == 0 && in_word) {
    word[len] = '\0';
    hvdrun_argv_push(&words, word);
  }
  if (rc == 0)
    for (int k = 0; k < words.n; k++) hvdrun_argv_push(out, words.v[k]);
  hvdrun_argv_free(&words);
  free(word);
  return rc;
}
