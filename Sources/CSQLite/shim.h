#include <sqlite3.h>

/* sqlite3_config is variadic, which Swift cannot call: the settings Strata makes, each a
   plain function. Effective only before SQLite initializes (the first connection opened). */

/* No memory statistics: every SQLite allocation and free otherwise takes a process-wide
   mutex to count it (SQLITE_CONFIG_MEMSTATUS), which the disk workers and the writer contend
   on. Strata reads no sqlite3_status() figure. */
static inline int strata_sqlite3_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
