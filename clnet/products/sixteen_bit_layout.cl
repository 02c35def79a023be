// How a matrix stored in 16 bits for the tensor cores' products (sixteen_bit.cl) lies in memory:
// in atoms of 8 rows by 32 columns (512 bytes), each row's four 16-byte chunks swizzled (chunk q
// of row r at q ^ (r / 2 % 4)), atoms down the rows, then the next 32 columns. An atom is what
// wgmma's 64-byte swizzle reads, along its rows (an operand along k) or along its columns (along m
// or n) alike, so one copy serves a layer's forward and its gradients; and a product's slice of
// 128 rows by 32 depths is 8 KiB in one piece (32 rows by 128 columns: four pieces of 2 KiB), which
// one cp.async.bulk copies. Rows and columns are padded to multiples of 128 (a block), with zeros
// that no writer touches: a slice is always whole, and its depths past the matrix add nothing.
// `atom_rows`: the padded rows / 8. Writers of such copies (rounding, a dense layer's forward and
// dL/dz, a norm's forward) store through this.
inline long atom_index(const int i, const int j, const int atom_rows)
{
    return (((long)(j / 32) * atom_rows + i / 8) * 8 + i % 8) * 32 + ((j / 8 % 4) ^ (i / 2 % 4)) * 8 + j % 8;
}
