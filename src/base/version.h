/* version.h - anvil's version: what `anvil version` prints, what an
 * OpenLineage producer names, and what a fleet profile's `agent` pin is
 * compared with (fleet/steps.h). A build may define ANVIL_VERSION itself. */
#ifndef ANVIL_BASE_VERSION_H
#define ANVIL_BASE_VERSION_H

#ifndef ANVIL_VERSION
#define ANVIL_VERSION "0.1.0-dev"
#endif

#endif
