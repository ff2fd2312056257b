// cli_internal.h: helpers shared by the command files.
#ifndef GALLEY_CLI_INTERNAL_H
#define GALLEY_CLI_INTERNAL_H

#include "galley/recipe.h"

// Parses "RECIPE [key=value ...]" and loads the recipe. Returns 0 (loaded), 1 (help printed)
// or -1 (error printed).
int cli_load_recipe(const char *cmd, int argc, char **argv, recipe_t *r);

#endif
