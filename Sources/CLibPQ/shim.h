#ifndef PERMAUDIT_CLIBPQ_SHIM_H
#define PERMAUDIT_CLIBPQ_SHIM_H
#include <libpq-fe.h>

/* Character macros Swift cannot import, exposed as constants. */
static const int permaudit_PG_DIAG_SQLSTATE = PG_DIAG_SQLSTATE;
static const int permaudit_PG_DIAG_MESSAGE_PRIMARY = PG_DIAG_MESSAGE_PRIMARY;
static const int permaudit_PG_DIAG_MESSAGE_DETAIL = PG_DIAG_MESSAGE_DETAIL;
static const int permaudit_PG_DIAG_MESSAGE_HINT = PG_DIAG_MESSAGE_HINT;
static const int permaudit_PG_DIAG_SEVERITY = PG_DIAG_SEVERITY_NONLOCALIZED;

#endif
