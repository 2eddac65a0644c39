/**
 * What other domains ask of users and their roles: the users domain owns those tables
 * (broker/db/owners.ts), and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';

export type { Db };
