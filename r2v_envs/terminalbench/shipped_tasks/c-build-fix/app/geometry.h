#ifndef GEOMETRY_H
#define GEOMETRY_H
double hypotenuse(double a, double b);
#endif
