#include <stdio.h>
#include <stdlib.h>
#include "geometry.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s A B\n", argv[0]);
        return 2;
    }
    printf("%.3f\n", hypotenuse(atof(argv[1]), atof(argv[2])));
    return 0;
}
