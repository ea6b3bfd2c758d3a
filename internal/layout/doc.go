// Package layout holds no code: its test keeps the README's layout table
// true. Every package of the module has a row, every row a package, and no
// package imports a package of this module that its row does not allow.
package layout
