// zone_server: see zone_server_main.cc.
#include "zone_server_main.h"

int main(int argc, char** argv) { return drover::examples::ZoneServerMain(argc, argv); }
