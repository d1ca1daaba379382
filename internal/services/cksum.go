package services

// cksum returns the checksum of POSIX cksum(1) (a CRC-32 with the length
// appended), by which the script named a checkout's directories outside it:
// the same checkout keeps finding the same PostgreSQL cluster.
func cksum(data []byte) uint32 {
	var crc uint32
	add := func(b byte) {
		crc ^= uint32(b) << 24
		for range 8 {
			if crc&0x80000000 != 0 {
				crc = crc<<1 ^ 0x04c11db7
			} else {
				crc <<= 1
			}
		}
	}
	for _, b := range data {
		add(b)
	}
	for n := len(data); n > 0; n >>= 8 {
		add(byte(n))
	}
	return ^crc
}
