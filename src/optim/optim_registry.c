// optim_registry.c: the optimizer rules by OPT_* value, built from GL_OPTIM_RULES
// (backend_types.h, one line per rule); each rule's file defines its entry.
#include <stddef.h>

#include "optim/optim_internal.h"

#define RULE_DECLARE_(E, name) extern const gl_optim_rule optim_rule_##name;
GL_OPTIM_RULES(RULE_DECLARE_)

#define RULE_ENTRY_(E, name) [OPT_##E] = &optim_rule_##name,
static const gl_optim_rule *const rules[OPT_COUNT] = {GL_OPTIM_RULES(RULE_ENTRY_)};

#define RULE_NAME_(E, name) #name,
const char *const optim_names[OPT_COUNT + 1] = {GL_OPTIM_RULES(RULE_NAME_) NULL};

const gl_optim_rule *optim_rule(int type) { return type >= 0 && type < OPT_COUNT ? rules[type] : NULL; }

const char *optim_name(int type) { return type >= 0 && type < OPT_COUNT ? optim_names[type] : "?"; }
