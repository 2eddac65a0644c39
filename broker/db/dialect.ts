/** The two databases the store runs on (a leaf module: the store and its migrations both need it). */
export type Dialect = 'sqlite' | 'postgres';
